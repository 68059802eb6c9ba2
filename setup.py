"""The one compiled part: tlog._sha256, batched node hashing through OpenSSL.

Optional by design: where there is no C compiler or no OpenSSL headers the build
skips it and tlog.hashing uses hashlib (same results, about 4x slower in bulk).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tlog._sha256",
            sources=["tlog/_sha256.c"],
            libraries=["crypto"],
            extra_compile_args=["-O2", "-Wno-deprecated-declarations"],
            optional=True,
        )
    ]
)
