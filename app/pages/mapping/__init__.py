"""The Maps page's parts (:mod:`app.pages.maps` is the page and its layout): its schema view (:mod:`.schemas`: a
library of learned maps and the match of the page's walk to them). Dash's page discovery does not import these files:
the page does."""
