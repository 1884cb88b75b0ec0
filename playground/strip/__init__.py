"""strip"""
