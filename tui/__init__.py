"""The rlwatch dashboard: the Textual application, its screens, dialogs and stylesheets."""
