"""Every catalogue and its one loader: the check data (checks/*.toml), the log
signatures, the runtimes, the tiles, the bench shapes. Reads only the package's data and the
catalogue files a user names.
"""
