"""The CPU serving image built and run without a Docker engine: podman with runc on a Debian bookworm base
made by debootstrap (docs/deployment.md, "Building and running the image here").

base       the Debian base: debootstrap, slimmed like Debian's slim images, cached, imported into podman
podman     podman's command line (runc, ulimits the host allows) and the pip settings passed to a build
build      `podman build` of the CPU image, its size layer by layer
container  containers of the image: started, probed, stopped, waited for
__main__   `python -m deploy.image` (`make image-check`): base, build, figures, the image tests
"""
