"""Tests of service/documents: sentence segmentation."""
