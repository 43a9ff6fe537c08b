"""metamod.evaluate"""
