"""The chapter files are consistent: pairs in sync, no outputs, the Colab cell from _config.yml."""

import shutil

from tutorial_lib import book


def test_chapters_pass_the_notebook_checks():
    assert book.check_notebooks() == []


def test_setup_cell_is_generated_from_the_one_url():
    url = book.repository_url()
    assert url.startswith("https://github.com/")
    source = book.setup_cell_source(url)
    assert f"git+{url}" in source and "google.colab" in source
    compile(source, "<setup cell>", "exec")  # valid Python


def test_checks_catch_a_stale_pair_and_committed_outputs(tmp_path):
    for name in ("_config.yml", "notebooks"):
        src = book.ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    chapter = sorted((tmp_path / "notebooks").glob("01_*.py"))[0]
    chapter.write_text(chapter.read_text() + "\n# %%\nprint('new cell')\n")
    ipynb = chapter.with_suffix(".ipynb")
    ipynb.write_text(ipynb.read_text().replace('"outputs": []', '"outputs": [{"output_type": "stream", "name": "stdout", "text": "x"}]', 1))
    problems = book.check_notebooks(tmp_path)
    assert any("differ" in p for p in problems)
    assert any("with outputs" in p for p in problems)


def test_html_check_reports_missing_pages(tmp_path):
    problems = book.check_html(tmp_path)
    assert len(problems) == len(book.chapter_sources()) and all("missing" in p for p in problems)
