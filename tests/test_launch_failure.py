"""A worker's failure travels as a record (fleet/failure.py), and the user's one line is made from it."""

from types import SimpleNamespace

import pytest
import torch.distributed as dist

from mjfleet.errors import UsageError
from mjfleet.fleet.failure import (
    EXCEPTION,
    LOST_PEER,
    NO_PYTHON_ERROR,
    SIGNAL,
    USAGE_ERROR,
    Failure,
    first_cause,
    from_exception,
    from_process_failure,
    lost_a_peer,
)


def elastic_failure(message: object, exitcode: int = 1) -> SimpleNamespace:
    """What torch elastic reports for a failed worker process: its error file's message and its exit code."""
    return SimpleNamespace(message=message, exitcode=exitcode)


def test_a_record_survives_its_json_round_trip():
    record = Failure(3, "hostb", EXCEPTION, "ValueError: boom", "/logs/hostb[1].log")
    assert Failure.from_json(record.to_json()) == record


@pytest.mark.parametrize(
    "text", ["", "[rank 1] ValueError: boom", '{"message": "x"}', None, '{"kind": "odd"}']
)
def test_text_that_holds_no_record_reads_as_none(text):
    assert Failure.from_json(text) is None


def test_the_message_names_rank_first_line_and_log_file_in_one_line():
    record = Failure(1, "localhost", EXCEPTION, "ValueError: boom", "/logs/localhost[1].log")
    assert record.message(several_hosts=False) == (
        "worker rank 1 failed: ValueError: boom (its log: /logs/localhost[1].log)"
    )


def test_the_message_names_the_host_when_the_run_has_several():
    record = Failure(1, "hostb", SIGNAL, "killed by SIGKILL")
    assert record.message(several_hosts=True, no_log_file=" (no log files)") == (
        "worker rank 1 on hostb failed: killed by SIGKILL (no log files)"
    )


def test_a_usage_error_is_its_own_first_line():
    record = from_exception(UsageError("checkpoint x.pt does not fit (rank 0)"), 0, "hosta")
    assert (
        record.kind == USAGE_ERROR
        and record.message(several_hosts=True) == "checkpoint x.pt does not fit (rank 0)"
    )


def test_a_worker_that_failed_by_itself_is_the_cause_before_one_that_lost_a_peer_then_the_lowest_rank():
    lost = Failure(0, "a", LOST_PEER, "DistBackendError: connection closed by peer")
    failed = [Failure(3, "b", EXCEPTION, "ValueError: x"), Failure(2, "b", SIGNAL, "killed by SIGKILL")]
    assert first_cause([lost, *failed]) == failed[1]
    assert first_cause([lost]) == lost


@pytest.mark.parametrize(
    ("exc", "lost"),
    [
        (dist.DistBackendError("gloo: connection closed"), True),
        (RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer"), True),
        (ConnectionResetError("Connection reset by peer"), True),
        (RuntimeError("shapes do not match"), False),
        (ValueError("gloo"), False),
    ],
)
def test_one_rule_says_whether_a_worker_only_lost_a_peer(exc, lost):
    assert lost_a_peer(exc) is lost
    assert (from_exception(exc, 0).kind == LOST_PEER) is lost


def test_the_record_a_worker_wrote_comes_back_with_the_agents_rank_and_host():
    written = Failure(None, "", EXCEPTION, "ValueError: boom")
    assert from_process_failure(elastic_failure(written.to_json()), 5, "hostc") == Failure(
        5, "hostc", EXCEPTION, "ValueError: boom"
    )


def test_a_record_written_through_torch_elastics_error_handler_is_read_back(tmp_path, monkeypatch):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure, get_error_handler

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    written = Failure(None, "", USAGE_ERROR, "unknown task 'Cartpol'")
    get_error_handler().record_exception(written.as_exception())
    seen = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(error_file))
    assert from_process_failure(seen, 2, "hostb") == Failure(
        2, "hostb", USAGE_ERROR, "unknown task 'Cartpol'"
    )


def test_a_worker_killed_by_a_signal_is_a_signal_record():
    assert from_process_failure(
        elastic_failure("Signal 9 (SIGKILL) received by PID 7", -9), 1, "h"
    ) == Failure(1, "h", SIGNAL, "killed by SIGKILL")


def test_a_worker_that_exited_without_a_python_error_says_so():
    bare = elastic_failure("To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    assert from_process_failure(bare, 1, "h").first_line == NO_PYTHON_ERROR


def test_torch_elastics_own_error_record_gives_its_first_line():
    caught = elastic_failure({"message": "RuntimeError: store\nmore", "extraInfo": {"timestamp": "0"}})
    assert from_process_failure(caught, 0, "h") == Failure(0, "h", EXCEPTION, "RuntimeError: store")
