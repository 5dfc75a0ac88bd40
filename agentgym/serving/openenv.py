"""The OpenEnv bridge: agentgym envs served with OpenEnv's own server machinery (openenv-core 0.3), so OpenEnv
clients (its ``EnvClient``, and the trainers built on it: TRL, SkyRL) play them.

OpenEnv's types for agentgym's contract:

* ``AgentGymAction``: ``text``, the agent's whole turn as raw text.
* ``AgentGymObservation``: ``messages`` (the new chat messages), ``reward``, ``done`` (terminated or truncated),
  ``terminated``, ``truncated`` and ``info`` (agentgym's ``info``; also in OpenEnv's ``metadata``, which OpenEnv's
  wire format leaves out).
* ``AgentGymState``: ``episode_id``, ``step_count``, ``env_id``, ``task_id``, ``turn``, ``done``.

``AgentGymEnvironment`` (an OpenEnv ``Environment``) wraps ``gymnasium.make(env_id, **env_kwargs)``; its ``reset``
takes ``seed``, ``episode_id`` and ``options`` (agentgym's: ``task_index``, ``task_id``, ...).
:func:`create_openenv_app` serves it with OpenEnv's ``create_fastapi_app``: ``POST /reset``, ``POST /step``,
``GET /state``, ``/schema``, ``/metadata``, ``/health``, and the WebSocket ``/ws`` (and ``/mcp``). As in OpenEnv,
HTTP ``/reset`` and ``/step`` build a fresh env per request (so an HTTP ``/step`` alone is a 409 that says so);
multi-step episodes go over a WebSocket session, one env per connection: ``AgentGymEnvClient`` (an OpenEnv
``EnvClient``) or OpenEnv's ``GenericEnvClient`` with ``{"text": ...}`` actions. Sessions are capped
(``max_sessions``, a quarter of them per client) and closed after ``idle_timeout`` seconds unused (OpenEnv's
reaper), request bodies and WebSocket messages are capped (``max_body_bytes``), envs are built off the event loop,
and a bearer ``token`` is required on every request and WebSocket handshake when given (:func:`serve_openenv`
requires one beyond loopback).

openenv-core is an optional dependency (``pip install 'agentgym-suite[openenv]'``); it is imported on first use::

    from agentgym.serving.openenv import AgentGymEnvClient, serve_openenv
    serve_openenv("agentgym/SearchQA-v0", {"dataset": "tiny"}, port=8001)            # in one process
    with AgentGymEnvClient(base_url="http://127.0.0.1:8001").sync() as client:      # in another
        result = client.reset(seed=0)
        result = client.step("<search> founder of Gounboul Systems </search>")
        print(result.observation.messages, result.reward, result.done)
"""

from __future__ import annotations

import functools
import uuid
from types import SimpleNamespace
from typing import Any

import gymnasium as gym

from agentgym.serving.server import ClientKey, RequestGuard, env_uvicorn_config
from agentgym.tools.serving import check_bind, run_uvicorn

__all__ = ["EpisodeNotStartedError", "create_openenv_app", "openenv_types", "serve_openenv"]

#: The names this module builds on first use (they subclass openenv-core's classes): ``from agentgym.serving.openenv
#: import AgentGymEnvClient`` works, ``import *`` leaves them out.
_LAZY = ("AgentGymAction", "AgentGymObservation", "AgentGymState", "AgentGymEnvironment", "AgentGymEnvClient")


class EpisodeNotStartedError(RuntimeError):
    """``step`` on an env with no episode in progress (OpenEnv's HTTP ``/step`` builds a fresh env each request)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(openenv_types(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def openenv_types() -> SimpleNamespace:
    """The bridge's classes (they subclass openenv-core's, so they are built on first use).

    Raises ImportError, saying what to install, without openenv-core.
    """
    try:
        from openenv.core.client_types import StepResult
        from openenv.core.env_client import EnvClient
        from openenv.core.env_server.interfaces import Environment
        from openenv.core.env_server.types import Action, Observation, State
        from pydantic import Field
    except ImportError as e:
        raise ImportError(
            f"the OpenEnv bridge needs openenv-core ({e}): pip install 'agentgym-suite[openenv]' (openenv-core==0.3.0)"
        ) from e

    class AgentGymAction(Action):
        """One agent turn: the raw text the model generated (tags, tool calls and all)."""

        text: str = Field(description="the agent's whole turn as raw text")

    class AgentGymObservation(Observation):
        """The env's answer: the new chat messages, the reward, the end flags and agentgym's ``info``."""

        messages: list[dict[str, Any]] = Field(default_factory=list, description="the new chat messages")
        terminated: bool = Field(default=False, description="the episode ended by the task's own rule")
        truncated: bool = Field(default=False, description="the episode was cut (turn limit)")
        info: dict[str, Any] = Field(default_factory=dict, description="agentgym's info (turn, task_id, ...)")

    class AgentGymState(State):
        """The episode: OpenEnv's ``episode_id`` and ``step_count``, plus the env id, task, turn and end flag."""

        env_id: str = ""
        task_id: str | None = None
        turn: int = 0
        done: bool = True

    class AgentGymEnvironment(Environment[AgentGymAction, AgentGymObservation, AgentGymState]):
        """An agentgym env, ``gymnasium.make(env_id, **env_kwargs)``, as an OpenEnv ``Environment``."""

        SUPPORTS_CONCURRENT_SESSIONS = True  # every session builds its own env

        def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
            super().__init__()
            self.env_id = env_id
            self.env_kwargs = dict(env_kwargs or {})
            self._env: gym.Env | None = None  # built on first use: OpenEnv calls this constructor on its event loop
            self._state = AgentGymState(env_id=env_id)

        @property
        def env(self) -> gym.Env:
            """The agentgym env, ``gymnasium.make(env_id, **env_kwargs)``, built on first use (in OpenEnv's worker
            threads: its HTTP routes build an ``Environment`` per request on the event loop, where a slow
            constructor would stop every other request)."""
            if self._env is None:
                self._env = gym.make(self.env_id, **self.env_kwargs)
            return self._env

        def reset(
            self,
            seed: int | None = None,
            episode_id: str | None = None,
            options: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> AgentGymObservation:
            if kwargs:
                raise ValueError(f"unknown reset argument(s) {sorted(kwargs)}: agentgym envs take seed, episode_id "
                                 "and options (task_index, task_id, ...)")  # fmt: skip
            obs, info = self.env.reset(seed=seed, options=options)
            self._state = AgentGymState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, env_id=self.env_id,
                                        task_id=info.get("task_id"), turn=0, done=False)  # fmt: skip
            return AgentGymObservation(messages=obs, info=info, metadata=info, reward=None, done=False)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> AgentGymObservation:
            """One agent turn (``timeout_s`` is not used: the env's own limits apply)."""
            if self._state.done:
                raise EpisodeNotStartedError(
                    "no episode in progress: reset first. OpenEnv's HTTP /reset and /step build a fresh env per "
                    "request; play multi-step episodes over the WebSocket /ws (EnvClient)"
                )
            text = action.text if isinstance(action, AgentGymAction) else action
            obs, reward, terminated, truncated, info = self.env.step(text)
            done = bool(terminated or truncated)
            state = self._state
            self._state = state.model_copy(
                update={"step_count": state.step_count + 1, "turn": info.get("turn", state.turn + 1), "done": done}
            )
            return AgentGymObservation(messages=obs, reward=float(reward), done=done, terminated=bool(terminated),
                                       truncated=bool(truncated), info=info, metadata=info)  # fmt: skip

        @property
        def state(self) -> AgentGymState:
            return self._state

        def close(self) -> None:
            if self._env is not None:
                self._env.close()

    class AgentGymEnvClient(EnvClient[AgentGymAction, AgentGymObservation, AgentGymState]):
        """OpenEnv's ``EnvClient`` for agentgym envs: ``step`` takes an ``AgentGymAction`` or the text itself;
        ``token`` is sent as a bearer token on the WebSocket handshake."""

        _ws: Any  # EnvClient's WebSocket connection (None until connected)

        def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
            super().__init__(base_url, **kwargs)
            self._token = token

        async def connect(self) -> AgentGymEnvClient:
            if self._token is None or self._ws is not None:
                await super().connect()
                return self
            from websockets.asyncio.client import connect as ws_connect

            try:
                self._ws = await ws_connect(self._ws_url, open_timeout=self._connect_timeout,
                                            max_size=self._max_message_size,
                                            additional_headers={"Authorization": f"Bearer {self._token}"})  # fmt: skip
            except Exception as e:
                raise ConnectionError(f"Failed to connect to {self._ws_url}: {e}") from e
            return self

        def _step_payload(self, action: Any) -> dict[str, Any]:
            return {"text": action.text if isinstance(action, AgentGymAction) else str(action)}

        def _parse_result(self, payload: dict[str, Any]) -> Any:
            obs = AgentGymObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                      done=payload.get("done", False))  # fmt: skip
            return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

        def _parse_state(self, payload: dict[str, Any]) -> AgentGymState:
            return AgentGymState(**payload)

    return SimpleNamespace(
        AgentGymAction=AgentGymAction,
        AgentGymObservation=AgentGymObservation,
        AgentGymState=AgentGymState,
        AgentGymEnvironment=AgentGymEnvironment,
        AgentGymEnvClient=AgentGymEnvClient,
    )


def create_openenv_app(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    max_sessions: int = 64,
    max_sessions_per_client: int | None = None,
    idle_timeout: float | None = 300.0,
    token: str | None = None,
    max_body_bytes: int = 1 << 20,
    client_key: str = "peer",
) -> Any:
    """OpenEnv's FastAPI app (``create_fastapi_app``) serving ``env_id``, with agentgym's limits and token check.

    The env is built once here, so an unknown id or a bad argument fails now rather than in every session; later
    envs are built off the event loop (``AgentGymEnvironment.env``). ``max_sessions``: WebSocket sessions at most
    (one env each); ``max_sessions_per_client``: per client (default a quarter; ``client_key`` as in
    :class:`agentgym.serving.server.ClientKey`; a handshake beyond is refused with close code 1013); ``idle_timeout``:
    seconds before OpenEnv's reaper closes an unused session (it runs with the app's lifespan, as under
    ``uvicorn``); ``token``: a bearer token required on every request (401) and WebSocket handshake (refused);
    ``max_body_bytes``: largest body (413).
    """
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.types import ConcurrencyConfig

    types = openenv_types()
    env_kwargs = dict(env_kwargs or {})
    gym.make(env_id, **env_kwargs).close()  # fail fast on an unknown id or a bad argument
    per_client = max_sessions_per_client or max(1, max_sessions // 4)
    if per_client < 1:
        raise ValueError(f"max_sessions_per_client must be >= 1, got {max_sessions_per_client}")
    factory = functools.partial(types.AgentGymEnvironment, env_id, env_kwargs)
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout)
    app = create_fastapi_app(factory, types.AgentGymAction, types.AgentGymObservation, concurrency_config=config)

    @app.exception_handler(EpisodeNotStartedError)
    async def not_started(request: Request, exc: EpisodeNotStartedError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "error": "env_state"}, status_code=409)

    app.add_middleware(RequestGuard, token=token, max_body_bytes=max_body_bytes, client_key=ClientKey.parse(client_key),
                       max_websockets_per_client=per_client)  # fmt: skip
    return app


def serve_openenv(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    log_level: str = "info",
    header_timeout: float = 10.0,
    max_connections: int = 1024,
    max_connections_per_peer: int | None = None,
    **app_kwargs: Any,
) -> None:
    """Serve ``env_id`` over OpenEnv's protocol with uvicorn until interrupted (:func:`create_openenv_app`).

    Binds to loopback by default; any other ``host`` needs a bearer ``token`` (ValueError otherwise, before the
    env is built). WebSocket messages are capped like bodies (``max_body_bytes``, default 1 MiB); connections as
    in :func:`agentgym.serving.server.env_uvicorn_config`.
    """
    check_bind(host, token)
    app = create_openenv_app(env_id, env_kwargs, token=token, **app_kwargs)
    max_body = app_kwargs.get("max_body_bytes", 1 << 20)
    config = env_uvicorn_config(app, host=host, port=port, log_level=log_level, header_timeout=header_timeout,
                                ws_max_size=max_body, max_connections=max_connections,
                                max_connections_per_peer=max_connections_per_peer)  # fmt: skip
    run_uvicorn(config)
