"""Loading ACME Insurance into DuckDB: the published DDL, adapted in code (the file is not
modified), then the 29 CSVs. Each change and its reason is in README.md ("Changes"):

1. The DDL has no `;` terminators: it is split on CREATE TABLE.
2. `ASC` inside PRIMARY KEY (...) is dropped: DuckDB's parser rejects it.
3. Every FOREIGN KEY clause is dropped: DuckDB needs the referenced table to exist at CREATE
   time, and 17 of the 25 name tables the DDL never defines (Claim's names Catastrophe, which
   the file creates last).
4. NOT NULL is dropped from the 4 columns whose CSV values are all empty (RELAX_NOT_NULL).
5. The PRIMARY KEY of Agreement_Party_Role is dropped: it includes Effective_Date, empty in
   all 4 rows.

The 13 DDL tables are filled from the CSV of the same name (text cast by INSERT to the DDL's
types); the 16 CSVs without a DDL table, which the R2RML mapping reads, are loaded with
DuckDB's type detection under their file name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DDL = "DDL/ACME_small.ddl"
DATA = "data"
# (4) columns declared NOT NULL whose CSV values are all empty
RELAX_NOT_NULL = {
    "Policy_Coverage_Detail": ["Coverage_Identifier", "Coverage_Part_Code"],
    "Policy_Amount": ["Geographic_Location_Identifier"],
    "Agreement_Party_Role": ["Effective_Date"],
}
# (5) tables whose primary key includes an all-empty column
DROP_PRIMARY_KEY = ["Agreement_Party_Role"]


def ddl_statements(ddl_text: str) -> dict[str, str]:
    """{table: the CREATE TABLE statement DuckDB runs} for the published DDL."""
    out: dict[str, str] = {}
    for stmt in re.split(r"(?=CREATE TABLE)", ddl_text):                       # (1)
        if not stmt.strip():
            continue
        m = re.match(r"CREATE TABLE\s+(\w+)", stmt)
        if m is None:
            raise ValueError(f"{DDL}: a statement that is not a CREATE TABLE: {stmt[:60]!r}")
        name = m.group(1)
        stmt = re.sub(r",\s*FOREIGN KEY\s*\([^)]*\)\s*REFERENCES\s+\w+\s*\([^)]*\)", "",
                      stmt)                                                     # (3)
        stmt = re.sub(r"\s+ASC\b", "", stmt)                                    # (2)
        for col in RELAX_NOT_NULL.get(name, []):                                # (4)
            stmt, n = re.subn(rf"(\b{col}\s+[\w(),]+?)\s+NOT NULL", r"\1 NULL", stmt)
            if n != 1:
                raise ValueError(f"{DDL}: {name}.{col} is no longer declared NOT NULL")
        if name in DROP_PRIMARY_KEY:                                            # (5)
            stmt, n = re.subn(r",\s*PRIMARY KEY\s*\([^)]*\)", "", stmt)
            if n != 1:
                raise ValueError(f"{DDL}: {name} no longer has a primary key")
        if "FOREIGN KEY" in stmt or re.search(r"\bASC\b", stmt):
            raise ValueError(f"{DDL}: {name} still holds a clause DuckDB rejects")
        out[name] = stmt.strip()
    return out


def load(con: Any, folder: Path) -> None:
    """The pack's `data.loader`: create and fill every table of `con` from `folder`
    (the ACME_Insurance folder of cwd-benchmark-data)."""
    ddl = ddl_statements((folder / DDL).read_text(encoding="utf-8"))
    csvs = {p.stem: p for p in sorted((folder / DATA).glob("*.csv"))}
    for name, stmt in ddl.items():
        if name not in csvs:
            raise ValueError(f"{DDL} declares {name}, which has no CSV in {folder / DATA}")
        con.execute(stmt)
        con.execute(f'INSERT INTO "{name}" BY NAME SELECT * FROM '
                    "read_csv(?, header = true, all_varchar = true)", [str(csvs[name])])
    for name, path in csvs.items():
        if name not in ddl:
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM read_csv(?, header = true)',
                        [str(path)])
