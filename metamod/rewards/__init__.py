"""metamod.rewards"""
