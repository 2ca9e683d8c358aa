"""pyvia: real-time, server-rendered web apps in Python."""
