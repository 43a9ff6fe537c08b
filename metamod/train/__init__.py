"""metamod.train"""
