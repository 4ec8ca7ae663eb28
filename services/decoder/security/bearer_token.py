"""The decoder's bearer token: one secret shared by the decoder and its clients.

Both read it from `WIDEBEAM_DECODER_AUTH_TOKEN`, or from the file `WIDEBEAM_DECODER_AUTH_TOKEN_FILE`
names (a mounted secret); never from a command-line flag, which `ps` shows every local user.
Clients send it as `authorization: Bearer <token>` metadata on every call."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PrivateAttr, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "WIDEBEAM_DECODER_"
TOKEN_ENV = ENV_PREFIX + "AUTH_TOKEN"  # the `auth_token` setting's variable
TOKEN_FILE_ENV = ENV_PREFIX + "AUTH_TOKEN_FILE"
METADATA_KEY = "authorization"  # gRPC metadata keys are lower case
SCHEME = "Bearer"
MIN_TOKEN_LENGTH = 16


def bearer(token: str) -> str:
    """The metadata value that carries `token`."""
    return f"{SCHEME} {token}"


def _checked(token: str, source: str) -> str:
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"{source}: the token needs at least {MIN_TOKEN_LENGTH} characters")
    # A metadata value is printable ASCII; no space, so `Bearer <token>` has one reading.
    if not all("!" <= ch <= "~" for ch in token):
        raise ValueError(f"{source}: the token may hold printable ASCII only, no spaces")
    return token


def read_token_file(path: Path) -> str:
    """The token a file holds (surrounding whitespace, such as a final newline, dropped)."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"auth_token_file {str(path)!r} cannot be read: {exc}") from None
    return _checked(text.strip(), f"auth_token_file {str(path)!r}")


class TokenSettings(BaseSettings):
    """`auth_token` or `auth_token_file` (not both); neither: no token."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True)

    auth_token: SecretStr | None = Field(
        None,
        description="bearer token every Decoder call must carry (environment only, never a flag)",
    )
    auth_token_file: Path | None = Field(None, description="file holding the bearer token")
    _token: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _resolve_token(self) -> TokenSettings:
        if self.auth_token is not None and self.auth_token_file is not None:
            raise ValueError("give auth_token or auth_token_file, not both")
        if self.auth_token is not None:
            self._token = _checked(self.auth_token.get_secret_value(), "auth_token")
        elif self.auth_token_file is not None:
            self._token = read_token_file(self.auth_token_file)
        return self

    @property
    def token(self) -> str | None:
        return self._token
