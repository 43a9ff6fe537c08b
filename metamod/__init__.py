"""metamod: train and evaluate learned moderators for multi-agent LLM debate and meta-reasoning loops."""

__version__ = "0.1.0"

#: Label attached to every result produced with simulated debaters (printed and saved alongside the numbers).
SIMULATED_LABEL = "simulated"
