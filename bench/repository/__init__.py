"""Many models in one server (issue 32): co-location, cold on-demand loads, load/unload cycles, perf_analyzer.

    python -m bench.repository [--quick] [--out DIR]     # make bench-repository

1. Co-location (bench/repository/colocate.py): two models in one process (a repository of two copies
   of a bundle, `--model-control-mode explicit --load-model '*'`) against two single-model processes
   (`--bundle` each, on the same files and cores) at concurrency 32 spread over both models (16 each):
   the throughput ratio (goal >= 0.9) and resident memory against the two processes' sum minus one
   process's fixed cost (the RSS of a server with no model loaded yet; goal: at most that).
2. Cold on-demand load (cold.py): first-request latency of a model on an on-demand server with nothing
   loaded, then a second request, beside CTranslate2's Translator load time for the same weights
   (where bench.marian's runs/bench-marian/<x>/ct2 exists).
3. Load/unload cycles under load (cycles.py): one model loaded and unloaded through tritonclient.grpc
   while another serves throughout: RSS growth over 20 cycles after 20 warm-up cycles under the same load
   against the model's size (goal <= 5%), and every request accounted for.
4. perf_analyzer against one named model of several (perf.py), when installed (make perf-analyzer-tools).

Separately, `python -m bench.repository.budget` (budget.py): three models taking turns under a memory budget.

Writes `<out>/repository.json` (every figure) and `<out>/repository-cycles-rss.json` with its chart; the
last line printed is one JSON object of the headline ratios and counts.
"""
