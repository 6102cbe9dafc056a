import logging
import time

from sie.weights.progress import report_progress


def test_progress_lines_while_a_folder_fills_and_a_closing_line(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sie.weights.progress")
    with report_progress("copying org/m", tmp_path, total_bytes=4_000_000, total_files=2, interval_s=0.05):
        (tmp_path / "a.bin").write_bytes(b"x" * 2_000_000)
        time.sleep(0.3)
        (tmp_path / "b.bin").write_bytes(b"x" * 2_000_000)
    lines = [r.getMessage() for r in caplog.records]
    assert any("copying org/m: 2.0 MB of 4.0 MB (50 %), 1 of 2 files after" in line for line in lines), lines
    assert lines[-1].startswith("copying org/m: 4.0 MB of 4.0 MB (100 %), 2 of 2 files, done in ")
