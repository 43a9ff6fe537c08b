"""metamod.rollout"""
