#!/usr/bin/env python3
"""Create a blob container on Azurite with one SharedKey-signed request (stdlib only).

Usage: azurite-container.py [ENDPOINT] [CONTAINER]
       (defaults: http://127.0.0.1:10000 tenure)

Azurite refuses anonymous container creation (403) and object_store cannot
create containers, so the test setup signs this one request with the
well-known development account key. Prints "created" or "exists"; exits
non-zero on any other answer.
"""
import base64
import hashlib
import hmac
import sys
import urllib.error
import urllib.request
from email.utils import formatdate

ACCOUNT = "devstoreaccount1"
# The public, well-known Azurite/Azure Storage Emulator development key.
KEY = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def create_container(endpoint: str, container: str) -> str:
    headers = {
        "x-ms-date": formatdate(usegmt=True),
        "x-ms-version": "2021-08-06",
        # Must be explicit: urllib would otherwise add
        # application/x-www-form-urlencoded and break the signature.
        "Content-Type": "application/octet-stream",
    }
    canonical_headers = "".join(
        f"{k}:{headers[k]}\n" for k in sorted(k for k in headers if k.startswith("x-ms-"))
    )
    # VERB, Content-Encoding, -Language, -Length, -MD5, Content-Type, Date,
    # If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since, Range
    string_to_sign = (
        "PUT\n\n\n\n\napplication/octet-stream\n\n\n\n\n\n\n"
        + canonical_headers
        + f"/{ACCOUNT}/{ACCOUNT}/{container}\nrestype:container"
    )
    signature = base64.b64encode(
        hmac.new(KEY, string_to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    headers["Authorization"] = f"SharedKey {ACCOUNT}:{signature}"
    request = urllib.request.Request(
        f"{endpoint.rstrip('/')}/{ACCOUNT}/{container}?restype=container",
        data=b"",
        method="PUT",
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status == 201:
                return "created"
            raise SystemExit(f"azurite-container: unexpected HTTP {response.status}")
    except urllib.error.HTTPError as err:
        if err.code == 409:  # ContainerAlreadyExists
            return "exists"
        body = err.read().decode(errors="replace")[:500]
        raise SystemExit(f"azurite-container: HTTP {err.code}: {body}")


if __name__ == "__main__":
    ep = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:10000"
    name = sys.argv[2] if len(sys.argv) > 2 else "tenure"
    print(create_container(ep, name))
