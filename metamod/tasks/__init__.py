"""metamod.tasks"""
