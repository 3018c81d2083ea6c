"""tracegen: LLM training jobs -> timed collective flows -> RoCEv2 pcaps and ns-3 scenarios."""

__version__ = "0.1.0"
