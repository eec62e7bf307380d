"""docs/profile-format.md is generated from the record and summary classes: it must be the
file the classes generate now, and every field of every class must be described."""

from pathlib import Path

from paddletune.profile import docs, figures, records
from paddletune.profile.schema import record_fields

DOC = Path(__file__).resolve().parents[1] / "docs" / "profile-format.md"


def test_the_format_page_is_what_the_classes_generate():
    assert DOC.read_text() == docs.document(), (
        "docs/profile-format.md is out of date: run "
        "`python -m paddletune.profile.docs > docs/profile-format.md`")


def test_every_field_of_every_class_is_described():
    undocumented = [f"{cls.__name__}.{f.name}"
                    for cls in docs.nested(list(records.RECORDS) + [figures.Summary])
                    for f in record_fields(cls) if f.name not in docs.field_docs(cls)]
    assert undocumented == []


def test_every_record_kind_has_a_section():
    text = DOC.read_text()
    for cls in records.RECORDS + (figures.Summary,):
        assert f"### {cls.__name__}\n" in text
