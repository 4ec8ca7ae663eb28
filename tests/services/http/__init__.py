"""Tests of the HTTP layer both services share (`widebeam.services.http`)."""
