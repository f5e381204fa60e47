"""Tests of the image and deploy/: Dockerfile, Kubernetes, Prometheus."""
