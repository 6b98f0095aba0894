"""Test helpers shared by several test folders."""
