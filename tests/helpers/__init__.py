"""Test doubles, run builders and fixtures shared by the test packages."""
