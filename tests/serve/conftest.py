"""The Docker tests' fixtures (tests/support/docker/): imported here, pytest gives them to every test module below."""

from tests.support.docker.engine import docker_engine  # noqa: F401  (a fixture)
from tests.support.docker.standin import standin_image  # noqa: F401  (a fixture)
