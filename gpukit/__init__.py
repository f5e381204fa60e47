"""The offline GPU kit: `make gpu-kit` gathers what the GPU check needs into small parts on a machine with
registry access; `make gpu-check KIT=DIR` verifies, installs and runs the check on a GPU host with no
network (docs/testing.md)."""
