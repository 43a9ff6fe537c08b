"""llama.cpp on the CPU: its OpenAI-compatible server (the ``llamacpp`` extra) started and stopped by metamod.

:mod:`~metamod.llm.llamacpp.server` starts ``python -m llama_cpp.server`` on a GGUF file (the embedded SmolLM2's own
Q4_1 weights by default) and stops it; :mod:`~metamod.llm.llamacpp.watchdog` is the child-side launcher that ends the
server when its parent goes away.
"""
