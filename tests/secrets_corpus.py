"""Fake secrets in every form they appear in a training host's logs and command lines, for the redaction tests.

Each value is fake but has its format's real shape. ``SECRETS`` lists the values that must never leave rlwatch;
``LINES`` puts them in the forms logs, environments, command lines, JSON, YAML and headers write them.
"""

from __future__ import annotations

HF = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456"
HF_ORG = "api_org_ZxCvBnMaSdFgHjKlQwErTyUiOp12"
OPENAI = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789"
OPENAI_PLAIN = "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"
ANTHROPIC = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345"
AWS_ID = "AKIAZ3EXAMPLE7QWERTY"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
GITHUB = "ghp_1234567890abcdefghijABCDEFGHIJ123456"
GITHUB_PAT = "github_pat_11ABCDEFG0abcdefghij_klmnopqrstuvwxyz0123456789ABCDEFGHIJ"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
WANDB = "0123456789abcdef0123456789abcdef01234567"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
BEARER = "tok3nBearerValue0123456789abcdef"
PASSWORD = "correct-horse-battery-staple"
URL_PASS = "s3cretUrlPass"
QUERY_TOKEN = "q7w8e9r0t1y2u3i4o5p6"
GOOGLE = "AIzaSyA1234567890abcdefghijklmnopqrstuv"
PRIVATE_KEY_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
CLIENT_SECRET = "cl1entS3cretValueXYZ"
API_KEY_JSON = "json-api-key-0987654321zyx"
YAML_TOKEN = "yamlTokenValue_5566778899"

SECRETS = (
    HF,
    HF_ORG,
    OPENAI,
    OPENAI_PLAIN,
    ANTHROPIC,
    AWS_ID,
    AWS_SECRET,
    GITHUB,
    GITHUB_PAT,
    SLACK,
    WANDB,
    JWT,
    BEARER,
    PASSWORD,
    URL_PASS,
    QUERY_TOKEN,
    GOOGLE,
    PRIVATE_KEY_BODY,
    CLIENT_SECRET,
    API_KEY_JSON,
    YAML_TOKEN,
)

LINES = (
    # an exception message quoting an environment, as in the security review
    f"RuntimeError: download failed HF_TOKEN={HF} WANDB_API_KEY={WANDB} Authorization: Bearer {BEARER} "
    f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
    # command-line flags, both spellings
    f"python3 train.py --hf_token {HF} --wandb_key={WANDB} --openai-api-key {OPENAI} --lr 1e-5",
    # bare token formats in free text
    f"using org token {HF_ORG}; anthropic {ANTHROPIC}; openai {OPENAI_PLAIN}; google {GOOGLE}",
    f"AWS key id {AWS_ID} github {GITHUB} pat {GITHUB_PAT} slack {SLACK}",
    f"jwt={JWT}",
    f"set-cookie session {JWT}",
    # JSON, and a Python dict as TRL prints metrics
    f'{{"api_key": "{API_KEY_JSON}", "model": "Qwen2.5-7B"}}',
    f"{{'loss': 0.12, 'password': '{PASSWORD}', 'eos_token': '</s>'}}",
    # YAML and logging records
    f"  hub_token: {YAML_TOKEN}",
    f"client_secret = {CLIENT_SECRET}",
    # URLs: credentials and secret-named query parameters
    f"requests.exceptions.HTTPError: 401 for https://user:{URL_PASS}@hub.example.com/api?token={QUERY_TOKEN}&x=1",
    # a private key pasted into a log
    f"-----BEGIN RSA PRIVATE KEY-----\n{PRIVATE_KEY_BODY}\n-----END RSA PRIVATE KEY-----",
)
