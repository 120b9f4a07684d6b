"""Runtime and kernel logs read from their sources (files, journald, Docker, kmsg)
and matched line by line against the signature catalogue while they stream.
"""
