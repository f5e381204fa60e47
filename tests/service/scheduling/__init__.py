"""Tests of service/scheduling: the job queue, policies, the worker and the scheduler."""
