"""Running the chapters locally: JupyterLab opens a chapter's .md as a notebook and runs it.

A headless Jupyter server from this environment serves chapters/06_batching.md
through its contents API as a notebook (jupytext), and a kernel started for
it runs the chapter's cells, gpu_ops included.
"""

import asyncio
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import jupyter_core.paths
import pytest
from tornado.websocket import websocket_connect

pytestmark = pytest.mark.book  # needs the book's tools (skipped on GPU machines)

ROOT = pathlib.Path(__file__).parents[1]
CHAPTER = "chapters/06_batching.md"
TOKEN = uuid.uuid4().hex


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}",
         "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
         f"--ServerApp.root_dir={ROOT}", "--ServerApp.open_browser=False",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                _request(url, "/api/status")
                break
            except OSError:
                if process.poll() is not None:
                    pytest.fail(f"jupyter server exited: {process.stderr.read().decode()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("jupyter server did not start in 60 s")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _request(url, path, body=None):
    request = urllib.request.Request(
        url + path, method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_jupyter_lab_and_jupytext_are_installed():
    bin_dir = pathlib.Path(sys.executable).parent
    assert shutil.which("jupyter-lab", path=str(bin_dir)), "no jupyter-lab beside this Python"
    extensions = [p for d in jupyter_core.paths.jupyter_path("labextensions")
                  for p in pathlib.Path(d).glob("*")]
    assert any(p.name == "jupyterlab-jupytext" for p in extensions), extensions


def test_a_chapter_opens_as_a_notebook(server):
    model = _request(server, f"/api/contents/{CHAPTER}?type=notebook&content=1")
    assert model["type"] == "notebook"
    assert model["content"]["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in model["content"]["cells"] if c["cell_type"] == "code"]
    assert any("gpu_ops.rms_norm" in c["source"] for c in code)


async def _run(server, kernel_id, code):
    """Execute `code` on the kernel; return its stdout and the reply's status."""
    socket_url = server.replace("http", "ws") + f"/api/kernels/{kernel_id}/channels?token={TOKEN}"
    connection = await websocket_connect(socket_url)
    msg_id = uuid.uuid4().hex
    await connection.write_message(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }))
    stdout, status = [], None
    while status is None:
        message = json.loads(await asyncio.wait_for(connection.read_message(), timeout=120))
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "stream":
            stdout.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            stdout.append("\n".join(message["content"]["traceback"]))
        elif message["msg_type"] == "execute_reply":
            status = message["content"]["status"]
    connection.close()
    return "".join(stdout), status


def test_a_chapters_cells_run_on_a_kernel(server):
    model = _request(server, f"/api/contents/{CHAPTER}?type=notebook&content=1")
    code = [c["source"] for c in model["content"]["cells"] if c["cell_type"] == "code"]
    session = _request(server, "/api/sessions", {
        "path": CHAPTER, "type": "notebook", "kernel": {"name": "python3"}})
    try:
        for cell in code[:2]:  # the set-up cell, then the first cell that calls gpu_ops
            output, status = asyncio.run(_run(server, session["kernel"]["id"], cell))
            assert status == "ok", output
        assert "rms_norm_fwd" in output
    finally:
        urllib.request.urlopen(urllib.request.Request(
            f"{server}/api/sessions/{session['id']}", method="DELETE",
            headers={"Authorization": f"token {TOKEN}"}), timeout=30)
