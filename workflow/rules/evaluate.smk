# placeholder, filled by its stage
