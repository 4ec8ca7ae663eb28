"""Load generator for a widebeam gateway (`widebeam loadgen`): closed-loop capacity measurement,
open-loop overload at a multiple of it, mixed traffic, every answer checked."""
