"""seeds"""
