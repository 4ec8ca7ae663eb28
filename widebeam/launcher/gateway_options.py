"""The gateway's options `widebeam up` passes through: the items file of the playground's item
search (by default the `--catalog` file, whose titles the served catalog does not keep), the
served model names, and which of them decode catalog-constrained by default. The flags mirror
`widebeam gateway serve`'s; a flag left out passes nothing, so the gateway keeps its default
(or its environment variable)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


def add_gateway_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--items-file",
        help="catalog file with item titles for the gateway's /v1/items and playground "
        "(default: the --catalog file)",
    )
    add(
        "--served-model-name",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="more names clients may give as `model` (e.g. flashrec); repeatable",
    )
    add(
        "--default-constrained",
        nargs="*",
        metavar="NAME",
        help="completions/chat requests that never say `constrained` are catalog-constrained: "
        "for these served model names, or for every name when none is given",
    )


@dataclass(frozen=True)
class GatewayOptions:
    items_file: str | None
    served_model_names: tuple[str, ...]
    default_constrained: tuple[str, ...] | None  # None: not given; (): every served name

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GatewayOptions:
        names = args.default_constrained
        return cls(
            args.items_file or args.catalog,
            tuple(args.served_model_name or ()),
            None if names is None else tuple(names),
        )

    def gateway_flags(self) -> list[str]:
        flags: list[str] = []
        if self.items_file is not None:
            flags += ["--items-file", self.items_file]
        if self.served_model_names:
            flags += ["--served-model-name", *self.served_model_names]
        if self.default_constrained is not None:
            flags += ["--default-constrained", *self.default_constrained]
        return flags
