"""The metadata server a job's container sees on a cluster made with `--job-service-account`.

Why: a job's container runs with the host's network (GPUDirect needs it), so it reaches the node's metadata
server and, through it, the node's service-account token: everything the nodes may do (a Slurm cluster's
munge key included, which makes anyone who holds it root on every node). With a job service account the
node fences the metadata server off from job containers and runs this server instead, as GKE's Workload
Identity does for pods:
- a job container (docker's `--cgroup-parent gcpgpujobs.slice`) cannot reach 169.254.169.254 at all: the
  startup script rejects that address for the slice's processes (iptables' cgroup match);
- the container's Google clients are pointed here (GCE_METADATA_HOST, GCE_METADATA_IP, GCPGPU_METADATA_URL),
  on 127.0.0.1 of the host's network;
- here a token is the job account's, minted with IAM Credentials' generateAccessToken by the node's account
  (which needs roles/iam.serviceAccountTokenCreator on the job account, and nothing of the job account's);
  the node's own token is never served;
- of the rest, only what a job needs to find itself passes through: its machine type, zone, name, the
  instance's gcpgpu-* attributes (its rendezvous), the project's id and the universe domain. Anything else
  (project metadata, ssh keys, identity tokens, recursive dumps) is refused with a 403 that says so.

Standard library only: the startup script runs it with the host's python3 (python3 -m or as a file), where no
Google library is installed. Bound to 127.0.0.1; a request must carry `Metadata-Flavor: Google` and no
X-Forwarded-For, as the real server asks.

    python3 jobmeta.py --job-service-account trainer@PROJECT.iam.gserviceaccount.com
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = 8989
ADDRESS = f"127.0.0.1:{PORT}"  # what the job's GCE_METADATA_HOST names
SLICE = "gcpgpujobs.slice"  # docker --cgroup-parent of every job container; the fence matches it
UPSTREAM = "http://169.254.169.254/computeMetadata/v1"
IAM = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{}:generateAccessToken"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
REFRESH_S = 300  # mint a new token when the cached one has less than this left
_PASS = re.compile(r"^(instance/(machine-type|zone|name|hostname|id|cpu-platform)"
                   r"|instance/attributes/gcpgpu-[a-z0-9-]+|project/(project-id|numeric-project-id)"
                   r"|universe/universe-domain)$")
_ACCOUNT = re.compile(r"^instance/service-accounts/(?P<who>[^/]+)(?:/(?P<what>email|scopes|aliases|token))?$")


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class JobMetadata:
    """What the server answers; `upstream` is the node's metadata server, `iam` generateAccessToken's URL."""

    def __init__(self, job_account: str, upstream: str = UPSTREAM, iam: str = IAM,
                 clock=time.time) -> None:
        self.job_account = job_account
        self.upstream = upstream.rstrip("/")
        self.iam = iam
        self._clock = clock
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None  # (access token, expiry on self._clock)

    def _get_upstream(self, path: str) -> bytes:
        request = urllib.request.Request(f"{self.upstream}/{path}", headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (the link-local server)
                return response.read()
        except urllib.error.HTTPError as e:
            raise Refused(e.code, f"the node's metadata server said {e.code} for {path}") from None
        except OSError as e:
            raise Refused(503, f"the node's metadata server did not answer ({e})") from None

    def token(self) -> tuple[str, int]:
        """(the job account's access token, seconds it has left), minted anew when little is left."""
        with self._lock:
            now = self._clock()
            if self._token is None or self._token[1] - now < REFRESH_S:
                self._token = self._mint(now)
            return self._token[0], int(self._token[1] - now)

    def _mint(self, now: float) -> tuple[str, float]:
        try:
            node = json.loads(self._get_upstream("instance/service-accounts/default/token"))["access_token"]
        except (ValueError, KeyError, TypeError):
            raise Refused(503, "the node's metadata server gave no token for the node's account") from None
        body = json.dumps({"scope": [SCOPE], "lifetime": "3600s"}).encode()
        url = self.iam.format(urllib.parse.quote(self.job_account, safe="@."))
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Authorization": f"Bearer {node}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (Google's API)
                answer = json.loads(response.read())
        except urllib.error.HTTPError as e:
            hint = (f": the nodes' service account needs roles/iam.serviceAccountTokenCreator on {self.job_account}"
                    if e.code == 403 else "")
            raise Refused(503 if e.code >= 500 else 403,
                          f"IAM Credentials refused a token for {self.job_account} ({e.code}){hint}") from None
        except (OSError, ValueError) as e:
            raise Refused(503, f"IAM Credentials did not answer ({e})") from None
        token = answer.get("accessToken")
        if not isinstance(token, str) or not token:
            raise Refused(503, "IAM Credentials answered with no accessToken")
        return token, now + 3600

    def answer(self, path: str, query: str) -> tuple[str, bytes]:
        """(content type, body) for GET /computeMetadata/v1/PATH?QUERY; raises Refused."""
        path = path.strip("/")
        recursive = "recursive=true" in query.lower()
        if path == "instance/service-accounts" and not recursive:
            return "application/text", f"default/\n{self.job_account}/\n".encode()
        m = _ACCOUNT.match(path)
        if m and m.group("who") in ("default", self.job_account):
            what = m.group("what")
            if what is None and recursive:  # google-auth asks for the account's description this way
                info = {"aliases": ["default"], "email": self.job_account, "scopes": [SCOPE]}
                return "application/json", json.dumps(info).encode()
            if what == "email":
                return "application/text", self.job_account.encode()
            if what == "scopes":
                return "application/text", (SCOPE + "\n").encode()
            if what == "aliases":
                return "application/text", b"default\n"
            if what == "token":
                token, left = self.token()
                return "application/json", json.dumps(
                    {"access_token": token, "expires_in": left, "token_type": "Bearer"}).encode()
        if recursive:
            raise Refused(403, f"{path or '/'}?recursive: a job's metadata server answers single values only")
        if _PASS.match(path):
            return "application/text", self._get_upstream(path)
        raise Refused(403, f"{path or '/'}: not served to a job (a job's metadata server passes its machine type, "
                           "zone, name, gcpgpu-* attributes and project id, and its own account's token)")


def _handler(meta: JobMetadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "Metadata Server for gcpgpu jobs"

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urllib.parse.urlsplit(self.path)
            if url.path in ("", "/"):  # google-auth's ping: who answers here
                self._send(200, "application/text", b"computeMetadata/\n")
                return
            if self.headers.get("X-Forwarded-For") is not None:
                self._send(403, "text/plain", b"a request with X-Forwarded-For is refused\n")
                return
            if self.headers.get("Metadata-Flavor") != "Google":
                self._send(403, "text/plain", b"missing Metadata-Flavor: Google\n")
                return
            prefix = "/computeMetadata/v1"
            if not (url.path == prefix or url.path.startswith(prefix + "/")):
                self._send(404, "text/plain", b"not found\n")
                return
            try:
                kind, body = meta.answer(url.path[len(prefix):].lstrip("/"), url.query)
            except Refused as e:
                self._send(e.status, "text/plain", (str(e) + "\n").encode())
                return
            self._send(200, kind, body)

        def do_PUT(self) -> None:  # noqa: N802
            self._send(403, "text/plain", b"a job's metadata server is read-only\n")

        do_POST = do_DELETE = do_PUT  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
            return  # no request log: a token's path is no secret, but nothing here needs one either

    return Handler


def serve(meta: JobMetadata, port: int = PORT) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:port (0: any free one) answering for `meta`; call serve_forever on it."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(meta))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gcpgpu-jobmeta", description=__doc__.splitlines()[0])
    parser.add_argument("--job-service-account", required=True)
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--upstream", default=UPSTREAM, help=argparse.SUPPRESS)  # test seams
    parser.add_argument("--iam", default=IAM, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    server = serve(JobMetadata(args.job_service_account, args.upstream, args.iam), args.port)
    print(f"gcpgpu-jobmeta: serving {args.job_service_account} to jobs on 127.0.0.1:{server.server_address[1]}",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
