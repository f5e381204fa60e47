"""Soak with faults: a real server under a long mix of valid, hostile and abandoned requests.

    python -m bench.soak --requests 10000 --concurrency 48       # `make soak` (default bundle)
    python -m bench.soak --requests 300 --concurrency 16 --bundle my-bundle --sources pairs.tsv

Starts `python -m service.server` on a free 127.0.0.1 port (bench/common/serverproc.py) with a model
repository of the bundle twice (`translator` loaded, `spare` not; control mode explicit; the
model-repository group restricted over both protocols by a key made for the run), computes every
valid text's reference in-process (service.runtime.runner.Runner, same bundle, decoded alone), warms
the server up, then sends the mix of bench/soak/cases.py from `--concurrency` closed-loop users over
several channels and one HTTP connection pool (the server's HTTP port: KServe v2 REST infer in JSON
and binary tensor data, generate, generate_stream as server-sent events, bench/soak/http_cases.py;
Score of long targets over both protocols and repository calls with and without the key,
bench/soak/admin_cases.py), with bursts of maximal requests beyond the queue every `--burst-every`
requests. Optionally (`--inject-every N`) the server fails every N-th decoder step through the
runner's fault hook (bench/soak/faulty_server.py). Checks (bench/soak/report.py), all printed in the
report (the last line is its JSON):

- every request got exactly one terminal answer (lost = duplicated = hanging = 0), with an
  allowed status and a clean message (no tracebacks, paths or class names);
- every accepted valid request's result is token-identical to decoding it alone (a scored pair: the
  same tokens and log-prob as scoring it alone); a repository call with the key succeeds, one
  without it is refused naming the header; an accepted request still in flight the repository's
  unload grace after a reload replaced its model version may be failed UNAVAILABLE (counted as
  `retired`);
- the server is SERVING at the end, and its RSS does not grow after its plateau: the median of the
  soak's second half within 5% of the first half's (RSS sampled at each twentieth);
- `translator_requests_total{method,code}` grew by the driver's own counts (HTTP requests under
  their route's path pattern, their HTTP status as the table's gRPC name); calls gRPC refused
  before any handler ran (a message over --max-message-bytes) are not in it and are left out, and
  a cancel or a too-short deadline may race the server's answer (see `compare_metrics`).

Progress goes to stderr (a bar on a terminal, a line at each twentieth otherwise, with the last RSS).
`main` writes the RSS curve to `<out>/soak-rss.json` and its chart beside it (warm-up marked).
Exit code 0 when every check passed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict

from bench.charts import from_results, record
from bench.soak.report import print_report
from bench.soak.run import Settings, run


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    defaults = Settings()
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, value in asdict(defaults).items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    settings = Settings(**vars(ap.parse_args(argv)))
    report = run(settings, log=lambda text: print(text, file=sys.stderr, flush=True))
    print_report(report)
    record.write(settings.out, "soak-rss", "rss", from_results.soak_rss(
        report.rss_curve_mib, settings.requests, settings.warmup_requests, report.rss_warm_kib / 1024,
        report.rss_end_kib / 1024))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
