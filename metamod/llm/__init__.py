"""metamod.llm"""
