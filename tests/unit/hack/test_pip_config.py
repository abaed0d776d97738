"""hack/pip_config.py: the base image gets the host's pip index settings (index, proxy, trust), never settings that
name host paths or change what gets installed, and its certificate path points at the bundle copied into the image."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hack"))

from pip_config import IMAGE_CA_BUNDLE, host_ca_bundle, host_config_files, image_pip_conf  # noqa: E402

CASES = [
    # (files: {name: text}, environ, expected pip.conf)
    ({}, {}, ""),
    ({"etc.conf": "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\nfind-links = /opt/wheels\n"},
     {"PIP_FIND_LINKS": "/opt/wheels", "PIP_DEFAULT_TIMEOUT": "180"},
     "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\ntimeout = 180\n\n"),
    ({"etc.conf": "[global]\nindex-url = https://mirror.example/simple\ntrusted-host = mirror.example\n",
      "user.conf": "[install]\nextra-index-url = https://other.example/simple\nno-index = true\n"},
     {},
     "[global]\nextra-index-url = https://other.example/simple\nindex-url = https://mirror.example/simple\n"
     "trusted-host = mirror.example\n\n"),
    # a later file overrides an earlier one, and a PIP_* variable overrides both
    ({"etc.conf": "[global]\nindex-url = https://a.example/simple\n",
      "user.conf": "[global]\nindex-url = https://b.example/simple\n"},
     {}, "[global]\nindex-url = https://b.example/simple\n\n"),
    ({"etc.conf": "[global]\nindex-url = https://a.example/simple\n"},
     {"PIP_INDEX_URL": "https://env.example/simple", "PIP_PROXY": "http://proxy:3128"},
     "[global]\nindex-url = https://env.example/simple\nproxy = http://proxy:3128\n\n"),
    # a host certificate path becomes the image's bundle path
    ({"etc.conf": "[global]\ncert = /usr/local/share/ca-certificates/corp.pem\n"}, {},
     f"[global]\ncert = {IMAGE_CA_BUNDLE}\n\n"),
    # settings that change what gets installed stay on the host
    ({"etc.conf": "[global]\nconstraint = /etc/c.txt\nrequire-hashes = true\nno-index = true\n"},
     {"PIP_FIND_LINKS": "/opt/wheels"}, ""),
]


@pytest.mark.parametrize("files,environ,expected", CASES)
def test_image_pip_conf(tmp_path: Path, files: dict[str, str], environ: dict[str, str], expected: str) -> None:
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    assert image_pip_conf([tmp_path / "absent.conf", *paths], environ) == expected


def test_a_broken_config_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.conf").write_text("index-url = no section\n")
    with pytest.raises(SystemExit, match="bad.conf"):
        image_pip_conf([tmp_path / "bad.conf"], {})


def test_config_files_in_pips_order(tmp_path: Path) -> None:
    files = host_config_files(tmp_path, {"XDG_CONFIG_DIRS": "/a:/b", "PIP_CONFIG_FILE": "/x.conf"})
    assert files == [Path("/a/pip/pip.conf"), Path("/b/pip/pip.conf"), Path("/etc/pip.conf"),
                     tmp_path / ".pip/pip.conf", tmp_path / ".config/pip/pip.conf", Path("/x.conf")]


def test_ca_bundle_is_the_one_pip_trusts(tmp_path: Path) -> None:
    corp = tmp_path / "corp.pem"
    corp.write_text("-----BEGIN CERTIFICATE-----\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\ncert = {corp}\n")
    assert host_ca_bundle([conf], {}) == corp
    assert host_ca_bundle([], {"PIP_CERT": str(corp)}) == corp
    assert host_ca_bundle([], {"SSL_CERT_FILE": str(corp)}) == corp
    missing = tmp_path / "missing.pem"
    found = host_ca_bundle([], {"PIP_CERT": str(missing)})
    assert found is None or found == Path(IMAGE_CA_BUNDLE)
