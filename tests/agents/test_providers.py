"""Claude on Amazon Bedrock and Google Vertex AI (--provider): the anthropic SDK's own
clients, built with the region and project of the usual environment, `check()` naming what is
missing, and a run's request reaching a local fake at the platform's path: with a Bedrock API
key (AWS_BEARER_TOKEN_BEDROCK, a bearer token), with AWS credentials (signed with SigV4 by the
SDK through boto3; the fake's request is signed again to check it), and with a Vertex access
token (so no google-auth)."""

from __future__ import annotations

import pytest

from conftest import run_records

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"
CLOUD_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE",
             "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "ANTHROPIC_BEDROCK_BASE_URL",
             "CLOUD_ML_REGION", "ANTHROPIC_VERTEX_PROJECT_ID", "GOOGLE_OAUTH_ACCESS_TOKEN",
             "ANTHROPIC_VERTEX_BASE_URL")


@pytest.fixture
def clean_env(monkeypatch):
    for name in CLOUD_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_bedrock_builds_the_bedrock_client_for_the_region(clean_env) -> None:
    import anthropic

    from pytest_kgbench.agents.models.anthropic import make_client

    clean_env.setenv("AWS_REGION", "eu-west-3")
    clean_env.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-key-not-a-secret")
    client = make_client("bedrock")
    assert isinstance(client, anthropic.AnthropicBedrock)
    assert client.aws_region == "eu-west-3"
    assert str(client.base_url).rstrip("/") == "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert client.max_retries == 0


def test_vertex_builds_the_vertex_client_for_the_project_and_region(clean_env) -> None:
    import anthropic

    from pytest_kgbench.agents.models.anthropic import make_client

    clean_env.setenv("CLOUD_ML_REGION", "us-east5")
    clean_env.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "kg-bench-project")
    clean_env.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.not-a-secret")
    client = make_client("vertex")
    assert isinstance(client, anthropic.AnthropicVertex)
    assert client.region == "us-east5" and client.project_id == "kg-bench-project"
    assert str(client.base_url).rstrip("/") == "https://us-east5-aiplatform.googleapis.com/v1"


def test_check_names_what_the_environment_lacks(clean_env) -> None:
    from pytest_kgbench.agents.models.anthropic import provider_problem

    bedrock = provider_problem("bedrock") or ""
    assert "a region (AWS_REGION or AWS_DEFAULT_REGION)" in bedrock
    assert "AWS_BEARER_TOKEN_BEDROCK" in bedrock
    vertex = provider_problem("vertex") or ""
    assert "CLOUD_ML_REGION" in vertex and "ANTHROPIC_VERTEX_PROJECT_ID" in vertex
    clean_env.setenv("CLOUD_ML_REGION", "global")
    clean_env.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "p")
    clean_env.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "t")
    assert provider_problem("vertex") is None


BEDROCK_PATH = "/model/anthropic.claude-sonnet-5-5-v1:0/invoke"
VERTEX_PATH = ("/projects/kg-bench-project/locations/us-east5/publishers/anthropic/models/"
               "claude-sonnet-5-5:rawPredict")
ACCESS_KEY, SECRET_KEY = "AKIDEXAMPLENOTASECRET", "wJalrXUtnFEMI/K7MDENG/not-a-secret"
PROVIDER_RUNS = {
    # a Bedrock API key: a bearer token
    "bedrock-key": ("bedrock", BEDROCK_PATH, {
        "AWS_REGION": "us-west-2", "AWS_BEARER_TOKEN_BEDROCK": "bedrock-key-not-a-secret",
        "ANTHROPIC_BEDROCK_BASE_URL": "{url}"}),
    # AWS credentials: the request signed with SigV4 (boto3's credential chain)
    "bedrock-sigv4": ("bedrock", BEDROCK_PATH, {
        "AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "ANTHROPIC_BEDROCK_BASE_URL": "{url}"}),
    "vertex": ("vertex", VERTEX_PATH, {
        "CLOUD_ML_REGION": "us-east5", "ANTHROPIC_VERTEX_PROJECT_ID": "kg-bench-project",
        "GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.not-a-secret", "ANTHROPIC_VERTEX_BASE_URL": "{url}"}),
}


def sigv4_holds(request: dict, region: str, service: str = "bedrock") -> bool:
    """Whether the request as the server received it carries a valid AWS Signature Version 4
    under the test's secret: its method, path, signed headers and bytes signed again here,
    from the specification (not botocore, which signed it), must give the same signature."""
    import hashlib
    import hmac
    from urllib.parse import quote

    auth = request["headers"]["Authorization"]
    algorithm, _, rest = auth.partition(" ")
    fields = dict(part.strip().split("=", 1) for part in rest.split(","))
    signed = fields["SignedHeaders"].split(";")
    access, day, scope_region, scope_service, terminal = fields["Credential"].split("/")
    stamp = request["headers"]["X-Amz-Date"]
    canonical = "\n".join([
        "POST", quote(request["path"].split("?")[0], safe="/~"), "",
        "".join(f"{h}:{' '.join(str(request['headers'][h]).split())}\n" for h in signed),
        fields["SignedHeaders"], hashlib.sha256(request["raw"]).hexdigest()])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + SECRET_KEY).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    mine = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return (algorithm == "AWS4-HMAC-SHA256" and access == ACCESS_KEY
            and (scope_region, scope_service, terminal) == (region, service, "aws4_request")
            and stamp.startswith(day) and "host" in signed
            and hmac.compare_digest(mine, fields["Signature"]))


@pytest.mark.parametrize("case", sorted(PROVIDER_RUNS))
def test_a_provider_run_reaches_the_platforms_path(case, project, api, clean_env) -> None:
    from fake_api import text

    provider, path, env = PROVIDER_RUNS[case]
    if case == "bedrock-sigv4":
        pytest.importorskip("boto3", reason="SigV4 signing needs boto3 (the bedrock extra)")
    api.default = lambda body: text(A_PLUS)
    for name, value in env.items():
        clean_env.setenv(name, value.format(url=api.url))
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                "--provider", provider).assert_outcomes(passed=1)
    (request,) = api.requests
    assert request["path"] == path
    assert "anthropic_version" in request["body"]  # the platform's body, not the API's header
    assert "model" not in request["body"]  # the platform names it in the path
    auth = request["headers"]["Authorization"]
    if case == "bedrock-key":
        assert auth == "Bearer bedrock-key-not-a-secret"
    elif case == "vertex":
        assert auth == "Bearer ya29.not-a-secret"
    else:
        assert sigv4_holds(request, "us-west-2"), auth
        tampered = dict(request, raw=request["raw"].replace(b"user", b"usex"))
        assert tampered["raw"] != request["raw"]
        assert not sigv4_holds(tampered, "us-west-2")  # the check can fail
        assert not sigv4_holds(request, "eu-west-1")
    (rec,) = run_records(p)
    if provider == "bedrock":
        assert rec["sent"]["model"] == "anthropic.claude-sonnet-5-5-v1:0"
    assert rec["metrics"] is not None and rec["answer"]["tokens"]["input"] > 0


def test_a_provider_run_without_its_environment_stops_before_anything(project, api,
                                                                       clean_env) -> None:
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                         "--provider", "bedrock")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--provider bedrock needs a region" in result.stderr.str()
    result = p.runpytest("questions", "--model", "sonnet", "--provider", "azure")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--provider: 'azure' is none of anthropic, bedrock, vertex" in result.stderr.str()
    result = p.runpytest("questions", "--model", "sonnet", "--batch", "--provider", "vertex")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--batch goes through the Message Batches API" in result.stderr.str()
    assert api.requests == []
