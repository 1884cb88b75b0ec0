"""samplers"""
