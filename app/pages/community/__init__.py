"""The Communities page's parts (:mod:`app.pages.communities` is the page and its layout): its look
(:mod:`.look`), its Infomap runs and hierarchy (:mod:`.runs`), its module map (:mod:`.module_map`) and its module card
(:mod:`.module_card`). Dash's page discovery does not import these files: the page does."""
