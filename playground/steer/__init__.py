"""steer"""
