"""A STAND-IN for the Hugging Face Hub, for tests only: these machines reach no model hub.

It serves one folder as a model repository on the routes huggingface_hub 2.4's snapshot_download takes (read in its
source: hf_api.py, file_download.py), reached through HF_ENDPOINT as a mirror would be:
  GET  /api/models/<repo>/revision/<rev>       the repository's commit (`sha`)
  GET  /api/models/<repo>/tree/<rev>           its files (path, size, oid), one page
  HEAD /<repo>/resolve/<rev>/<file>            the file's commit, ETag and size (X-Repo-Commit, ETag, Content-Length)
  GET  /<repo>/resolve/<rev>/<file>            the file's bytes
Anything else is a 404, as the hub answers a repository it does not have. No xet, no LFS pointers, no auth.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tests.support.loopback import loopback_server

COMMIT = "0" * 39 + "1"  # a 40-hex commit, as the hub's


class HubStandIn(BaseHTTPRequestHandler):
    repo_id: str
    folder: Path
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:
        return

    def files(self) -> dict[str, Path]:
        return {path.name: path for path in sorted(self.folder.iterdir()) if path.is_file()}

    def reply(self, status: int, body: bytes, headers: dict[str, str], send_body: bool = True) -> None:
        self.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def route(self, send_body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.requests.append(f"{self.command} {path}")
        api = f"/api/models/{self.repo_id}/"
        resolve = f"/{self.repo_id}/resolve/"
        if path.startswith(api + "revision/"):
            body = {"id": self.repo_id, "sha": COMMIT, "siblings": [{"rfilename": name} for name in self.files()]}
            self.reply(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, send_body)
        elif path.startswith(api + "tree/"):
            entries = [
                {"type": "file", "path": name, "size": file.stat().st_size, "oid": etag(file)}
                for name, file in self.files().items()
            ]
            self.reply(200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, send_body)
        elif path.startswith(resolve) and path.split("/")[-1] in self.files():
            file = self.files()[path.split("/")[-1]]
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{etag(file)}"', "Content-Type": "application/octet-stream"}
            self.reply(200, file.read_bytes(), headers, send_body)
        else:
            self.reply(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, send_body)

    def do_GET(self) -> None:
        self.route(send_body=True)

    def do_HEAD(self) -> None:
        self.route(send_body=False)


def etag(file: Path) -> str:
    return hashlib.sha1(file.read_bytes()).hexdigest()


@contextmanager
def hub_standin(repo_id: str, folder: Path) -> Iterator[tuple[str, list[str]]]:
    """The stand-in serving `folder` as `repo_id` for the `with` block; yields its URL (HF_ENDPOINT) and the requests
    it answered."""
    requests: list[str] = []
    handler = type("BoundHub", (HubStandIn,), {"repo_id": repo_id, "folder": folder, "requests": requests})
    with loopback_server(handler) as url:
        yield url, requests
