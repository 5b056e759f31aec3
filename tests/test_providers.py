"""Claude on Amazon Bedrock and Google Vertex AI (--provider): the anthropic SDK's own
clients, built with the region and project of the usual environment, `check()` naming what is
missing, and a run's request reaching a local fake at the platform's path (a Bedrock API key,
AWS_BEARER_TOKEN_BEDROCK, is sent as a bearer token, so no SigV4 signing and no boto3 here;
Vertex takes an access token, so no google-auth)."""

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

    from pytest_kgbench.agents.anthropic import make_client

    clean_env.setenv("AWS_REGION", "eu-west-3")
    clean_env.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-key-not-a-secret")
    client = make_client("bedrock")
    assert isinstance(client, anthropic.AnthropicBedrock)
    assert client.aws_region == "eu-west-3"
    assert str(client.base_url).rstrip("/") == "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert client.max_retries == 0


def test_vertex_builds_the_vertex_client_for_the_project_and_region(clean_env) -> None:
    import anthropic

    from pytest_kgbench.agents.anthropic import make_client

    clean_env.setenv("CLOUD_ML_REGION", "us-east5")
    clean_env.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "kg-bench-project")
    clean_env.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.not-a-secret")
    client = make_client("vertex")
    assert isinstance(client, anthropic.AnthropicVertex)
    assert client.region == "us-east5" and client.project_id == "kg-bench-project"
    assert str(client.base_url).rstrip("/") == "https://us-east5-aiplatform.googleapis.com/v1"


def test_check_names_what_the_environment_lacks(clean_env) -> None:
    from pytest_kgbench.agents.anthropic import provider_problem

    bedrock = provider_problem("bedrock") or ""
    assert "a region (AWS_REGION or AWS_DEFAULT_REGION)" in bedrock
    assert "AWS_BEARER_TOKEN_BEDROCK" in bedrock
    vertex = provider_problem("vertex") or ""
    assert "CLOUD_ML_REGION" in vertex and "ANTHROPIC_VERTEX_PROJECT_ID" in vertex
    clean_env.setenv("CLOUD_ML_REGION", "global")
    clean_env.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "p")
    clean_env.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "t")
    assert provider_problem("vertex") is None


def test_a_bedrock_run_reaches_the_model_invoke_path(project, api, clean_env) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    clean_env.setenv("AWS_REGION", "us-west-2")
    clean_env.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-key-not-a-secret")
    clean_env.setenv("ANTHROPIC_BEDROCK_BASE_URL", api.url)
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                "--provider", "bedrock").assert_outcomes(passed=1)
    (request,) = api.requests
    assert request["path"] == "/model/anthropic.claude-sonnet-5-5-v1:0/invoke"
    assert request["headers"]["Authorization"] == "Bearer bedrock-key-not-a-secret"
    assert "anthropic_version" in request["body"]  # the platform's body, not the API's header
    assert "model" not in request["body"]  # Bedrock names it in the path
    (rec,) = run_records(p)
    assert rec["sent"]["model"] == "anthropic.claude-sonnet-5-5-v1:0"
    assert rec["metrics"] is not None and rec["answer"]["tokens"]["input"] > 0


def test_a_vertex_run_reaches_the_raw_predict_path(project, api, clean_env) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    clean_env.setenv("CLOUD_ML_REGION", "us-east5")
    clean_env.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "kg-bench-project")
    clean_env.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.not-a-secret")
    clean_env.setenv("ANTHROPIC_VERTEX_BASE_URL", api.url)
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                "--provider", "vertex").assert_outcomes(passed=1)
    (request,) = api.requests
    assert request["path"] == ("/projects/kg-bench-project/locations/us-east5/publishers/"
                               "anthropic/models/claude-sonnet-5-5:rawPredict")
    assert request["headers"]["Authorization"] == "Bearer ya29.not-a-secret"
    assert "anthropic_version" in request["body"] and "model" not in request["body"]


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
