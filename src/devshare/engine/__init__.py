"""The scheduler itself: pure, synchronous, free of I/O.

The extender, the simulator and the CLI all run this same code.
"""
