"""An imported Marian model (opus-mt-en-de's shape, random weights) against CTranslate2's own converter:
the reference model builder (build), the engines, the servers and the footprint (`python -m bench.marian`)."""
