"""metamod.memory"""
