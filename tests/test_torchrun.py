"""torchrun.py: the launcher's environment read once: the defaults alone, a rank's values, and a malformed or
incomplete environment as one ConfigError naming the variable."""

from __future__ import annotations

import pytest

from gpufeed.errors import ConfigError
from gpufeed.torchrun import Launch, launch

RANK_1_OF_4 = {"WORLD_SIZE": "4", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node0",
               "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "2"}


@pytest.mark.parametrize("environ", [{}, {"WORLD_SIZE": "1"}, {"WORLD_SIZE": "", "MASTER_PORT": "x"}])
def test_a_process_alone_is_rank_0_of_1(environ):
    assert launch(environ) == Launch() and not launch(environ).distributed and launch(environ).is_main


def test_a_rank_set_without_a_world_is_kept():
    """As the readers before this module did: the sampler's LOCAL_RANK, the command line's RANK."""
    assert launch({"RANK": "3", "LOCAL_RANK": "1"}) == Launch(rank=3, local_rank=1)


def test_a_rank_reads_every_variable():
    job = launch(RANK_1_OF_4)
    assert job == Launch(4, 1, 1, 2, "node0", 29500, "abc-2") and job.distributed and not job.is_main


@pytest.mark.parametrize("change, named", [({"RANK": "one"}, "RANK='one' is not an integer"),
                                           ({"WORLD_SIZE": "4.0"}, "WORLD_SIZE='4.0' is not an integer"),
                                           ({"RANK": None}, "WORLD_SIZE is 4 but RANK is not set"),
                                           ({"MASTER_PORT": None}, "WORLD_SIZE is 4 but MASTER_PORT is not set")])
def test_a_malformed_environment_is_one_config_error_naming_the_variable(change, named):
    environ = {key: value for key, value in (RANK_1_OF_4 | change).items() if value is not None}
    with pytest.raises(ConfigError, match=named) as raised:
        launch(environ)
    assert "launch with torchrun" in str(raised.value) and "\n" not in str(raised.value)
