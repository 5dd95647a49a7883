"""Decode backends: ``cpu`` (numba) and ``gpu`` (CuPy + nvCOMP).

Nothing is imported eagerly: ``gtsamples.decode.cpu`` pulls in numba and
zstandard, ``gtsamples.decode.gpu`` CuPy.  Import the backend you need.
"""
