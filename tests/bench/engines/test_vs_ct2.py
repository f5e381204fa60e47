"""bench/engines/vs_ct2.py's choice of client and perf_analyzer's CPU accounting, without the binary."""

from __future__ import annotations

import resource
import stat
import sys
import textwrap
import time

from bench.engines.vs_ct2 import CLIENTS, server_figure
from bench.server import perf_analyzer

REPORT = ("Concurrency,Inferences/Second,Server Queue,Server Compute Input,Server Compute Infer,"
          "Server Compute Output,p50 latency,p90 latency,p99 latency,Avg latency\n"
          "1,{throughput},0,0,1000,0,1000,1000,1000,1000\n")


def test_the_server_figure_is_the_one_of_the_client_with_less_cpu_per_request():
    medians = {"server_c1_loadgen": 200.0, "cpu_server_c1_loadgen": 0.5,
               "server_c1_perf_analyzer": 230.0, "cpu_server_c1_perf_analyzer": 0.2,
               "server_c64_loadgen": 700.0, "cpu_server_c64_loadgen": 0.3,
               "server_c64_perf_analyzer": 650.0, "cpu_server_c64_perf_analyzer": 0.4}
    assert server_figure(medians, CLIENTS, 1) == ("perf_analyzer", 230.0)
    assert server_figure(medians, CLIENTS, 64) == ("loadgen", 700.0)
    assert server_figure(medians, CLIENTS[:1], 1) == ("loadgen", 200.0)


def test_perf_analyzer_cpu_per_request_is_its_cpu_over_the_requests_of_its_wall_time(tmp_path):
    """A stand-in binary that burns CPU and reports a throughput: the CPU per request the bench derives
    equals the child's CPU time (resource.getrusage) over throughput x wall time."""
    binary = perf_analyzer.binary(tmp_path)
    binary.parent.mkdir(parents=True)
    binary.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys, time
        report = sys.argv[sys.argv.index("-f") + 1]
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        open(report, "w").write({REPORT.format(throughput=50.0)!r})
        """))
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    data = perf_analyzer.write_input_data(["a"], tmp_path / "d.json")
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    row, cpu_ms = perf_analyzer.measure_with_cpu("127.0.0.1:1", data, 1, 10, tmp_path, tools=tmp_path)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert row.throughput == 50.0
    assert child_cpu >= 0.3
    # 1e3 x child CPU / (50 requests/s x its wall time), which lies between its CPU time (one thread)
    # and the wall time measured around the call
    assert 1e3 * child_cpu / (50.0 * wall) <= cpu_ms <= 1e3 / 50.0 * 1.0001


def test_the_cheaper_client_skips_what_was_not_measured_and_keeps_the_first_on_a_tie():
    nan = float("nan")
    assert perf_analyzer.cheaper_client({"loadgen": 0.3, "perf_analyzer": 0.1}) == "perf_analyzer"
    assert perf_analyzer.cheaper_client({"loadgen": nan, "perf_analyzer": 0.1}) == "perf_analyzer"
    assert perf_analyzer.cheaper_client({"loadgen": 0.2, "perf_analyzer": 0.2}) == "loadgen"
    assert perf_analyzer.cheaper_client({"loadgen": nan}) == "loadgen"
