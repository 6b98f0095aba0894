"""The vocabulary: quantities, dialects, requests, devices, allocations and their codecs.

Pure values, no scheduling logic and no I/O.
"""
