"""The one compiled part: tlog._native (batched SHA-256 through OpenSSL).

Optional by design: where there is no C compiler or no OpenSSL headers the build
skips it and tlog.formats.hashing uses hashlib (same results, about 4x slower in bulk).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tlog._native",
            sources=["tlog/_native.c"],
            libraries=["crypto"],
            extra_compile_args=["-O2", "-Wno-deprecated-declarations"],
            optional=True,
        )
    ]
)
