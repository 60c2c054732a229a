"""The GitHub Actions workflow: it parses, runs the README's test command, deploys from main."""

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def _workflow():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the key "on" as True.
    workflow["on"] = workflow.pop(True, workflow.get("on"))
    return workflow


def _readme_test_command():
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    (test_command,) = [c for c in commands if c.endswith(" test")]
    return test_command


def test_it_runs_on_every_push_and_pull_request():
    triggers = _workflow()["on"]
    assert "push" in triggers and "pull_request" in triggers
    assert triggers["push"] is None  # every branch


def test_the_test_job_runs_the_readme_test_command():
    steps = _workflow()["jobs"]["test"]["steps"]
    runs = [step["run"].strip() for step in steps if "run" in step]
    assert _readme_test_command() == "./build.sh test"
    assert _readme_test_command() in runs
    uses = [step.get("uses", "") for step in steps]
    assert any(u.startswith("actions/checkout@") for u in uses)
    assert any(u.startswith("actions/setup-python@") for u in uses)


def test_main_deploys_the_built_book_to_pages():
    jobs = _workflow()["jobs"]
    on_main = "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    (upload,) = [s for s in jobs["test"]["steps"]
                 if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "_build/html" and upload["if"] == on_main
    deploy = jobs["deploy"]
    assert deploy["needs"] == "test" and deploy["if"] == on_main
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]


def test_no_repository_address_is_written_in_the_workflow_or_the_config():
    # The book takes it from GITHUB_REPOSITORY in Actions (tools/book_site.py).
    for path in (WORKFLOW, ROOT / "_config.yml"):
        text = path.read_text()
        assert not re.search(r"github\.com/[\w.-]+/[\w.-]+", text), path
