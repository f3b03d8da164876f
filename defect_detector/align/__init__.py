"""The board against its golden image: registration (geometric, then photometric), the golden view, the golden check
and the tile gate."""
