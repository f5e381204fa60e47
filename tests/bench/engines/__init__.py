"""Tests of bench/engines: the engines in process, CTranslate2's conversion, the server against it."""
