"""Tests of bench/repository: many models in one server at tiny sizes."""
