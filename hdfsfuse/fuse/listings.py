"""Open directories: one page of entries at a time, fetched as readdir walks on. Does I/O."""

from __future__ import annotations

import logging

from hdfsfuse.fuse.inodes import Entry
from hdfsfuse.namenode.client import FileStatus, NameNodeClient

log = logging.getLogger(__name__)


class Listing:
    """An open directory: one page of entries at a time, fetched as readdir walks on.

    Entry i of the whole listing is `page[i - base]`; readdir offsets are i + 1.
    """

    def __init__(self, directory: Entry, namenode: NameNodeClient, page_cap: int | None) -> None:
        self.directory = directory
        self.namenode = namenode  # the opener's identity lists every page
        self.page_cap = page_cap  # listing_page_cap: pages listed at most
        self.restart()

    def restart(self) -> None:
        self.page: list[tuple[bytes, FileStatus]] = []
        self.base = 0
        self.start_after = b""
        self.pages = 0
        self.done = False

    @property
    def end(self) -> int:
        return self.base + len(self.page)

    async def next_page(self) -> None:
        """Move to the next page of (at most) 1000 entries."""
        page = await self.namenode.get_listing_page(self.directory.nn_path, self.start_after)
        self.pages += 1
        self.base = self.end
        self.page = [(e.path, e) for e in page.partialListing]
        if self.page:
            self.start_after = self.page[-1][0]
        self.done = page.remainingEntries == 0 or not self.page
        cap = self.page_cap
        if not self.done and cap is not None and self.pages >= cap:
            log.warning(
                "%s: listing truncated at listing_page_cap=%d pages (%d entries shown, %d more not listed)",
                self.directory.shown, cap, self.end, page.remainingEntries,
            )
            self.done = True
